"""``spark-submit jobs/<job>.py`` from a checkout (no --py-files zip): Python puts the script's own folder first on
sys.path, not the project, so ``import jobs`` would fail.  This puts the project's root there.  A job's script
header imports it by its bare name (``jobs/`` is on sys.path then), so the bootstrap lives here once."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
