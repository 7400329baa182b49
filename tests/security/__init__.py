"""Security tests: each attack on the trust boundary (issue #13) refused, with proof that nothing happened."""
