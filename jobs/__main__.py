"""``python -m jobs JOB ...``: the console command ``rocketmq-forensics`` (jobs/console.py's :func:`console`)."""
import sys

from jobs.console import console

if __name__ == "__main__":
    sys.exit(console())
