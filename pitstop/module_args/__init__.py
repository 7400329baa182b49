"""Args models of the modules that run as activities, one file per system.

They live apart from `activities/` so that the loader, the schema export and the
workflow sandbox can import them without importing any client library.
"""
