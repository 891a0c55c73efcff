"""Spark test fixtures; they live in spark_support.py so that test modules and the subprocess query
(eo_query.py) import them by a name no other conftest.py can shadow."""
from spark_support import any_server, go_server, name, rillet_server, spark  # noqa: F401
