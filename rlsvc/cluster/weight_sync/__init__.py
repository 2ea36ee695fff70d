"""The weight-sync transports as the driver runs them: each calls the trainer ranks' and rollout
workers' `ws_*` methods (rlsvc/cluster/actors.py) through their Ray handles. What runs inside
those actors (endpoints, senders and receivers, the publisher, the manifest) and the `WeightSync`
interface are plain Python, in rlsvc/weight_sync/."""
