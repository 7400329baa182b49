"""The platform's version inventory (docs/upgrade-process.md "Version inventory"): which version
of every component runs now, the target, the vendor support source, the validation state and the
rollback method.

  components.py  the component table (runbooks/compat/components.yaml) and the component keys
  facts.py       the registered ssh.facts results a runbook passes in, keyed by node
  detect.py      pure: where each kind of source finds a version (node info, labels, images...)
  collect.py     pure: API objects + SSH facts -> inventory rows, current/target/diff/skew maps
"""
