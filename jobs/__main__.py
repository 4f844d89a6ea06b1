"""``python -m jobs JOB ...``: the console command ``rocketmq-forensics`` (jobs/cli.py's :func:`console`)."""
import sys

from jobs.cli import console

if __name__ == "__main__":
    sys.exit(console())
