"""The job runtime: what every job runs in, none of it a job (issue 39 item 5).

* cli: a job's command line, its run from ``prepare`` to the exit code, the one error line of a failure;
  session: the SparkSession and the project's zip; stores: the ``--store`` arguments resolved to named stores.
* output: an output folder prepared, read and written through the fs seam; commit: the claim and the commit that
  make a run's outputs visible in one step; apart: the guard both use (an output never in or around an input);
  history: the audit history a run appends to; custody: the inputs' chain of custody, a gate of the commit.
* interrupts, causes, progress, display: SIGINT/SIGTERM, a failure's root cause in one line, the progress lines
  on stderr, numbers and moments in words.

Imports run one way: jobs/ -> runtime/ -> datasources/, decoding/, store_format/ (tests/test_layers.py).  runtime/
never imports a job: the console that dispatches to the jobs by name is jobs/console.py."""
