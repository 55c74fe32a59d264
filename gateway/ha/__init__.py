"""High availability: the shared-store standby (ActiveMQ's shared-storage master/slave).

:mod:`gateway.ha.store_lock` is the message store's file lock, the token of the
active gateway; :mod:`gateway.ha.role` is the role the admin endpoint reports;
:mod:`gateway.ha.standby` waits for the lock and starts the gateway when it has it.
"""
