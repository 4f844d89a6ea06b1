"""What the tests share besides their fixtures (tests/conftest.py): store builders, a browser driver, a file system
on a made-up scheme, the programs the cluster and Spark Connect tests run, and a hand-built range for testing one
check family without an audit."""
