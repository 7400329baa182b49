"""Security tests of issue #13 (the trust boundary): one file per part."""
