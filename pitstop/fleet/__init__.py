"""`pitstop fleet status`: the fleet-wide view of many clusters, read only from Temporal (the
CLI never reaches a cluster): each cluster's version inventory, the skew between clusters,
its last etcd backup and restore drill, and its runs in progress."""
