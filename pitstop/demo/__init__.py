"""What `pitstop demo` (`make demo`) runs and what the end-to-end tests share: `run` drives the
demo, `maintenance` the GPU node maintenance on the rehearsal cluster and how its outcome is
judged, `upgrade` the platform upgrade's rehearsal cluster and inventory."""
