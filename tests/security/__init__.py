"""Security tests of issue #13: each attack refused, and nothing happened."""
