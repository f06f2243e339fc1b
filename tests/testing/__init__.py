"""What the tests share that is not a fixture: paths of the test data, the CLI run
in-process or as a subprocess, local services and sample records. Fixtures stay in the
`conftest.py` files, which import from here; tests import from here, never from a conftest."""
