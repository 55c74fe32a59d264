"""Adversarial tests (issue 33): black-box attacks on gateways configured only from TOML.

Written apart from the code they attack, against the security contract (docs/security.md,
docs/admin.md): ``test_holes.py`` reproduces the fourteen holes of the issue (``test_hole_NN_…``),
``test_matrix.py`` checks every login x destination x permission over TCP and WebSocket,
``test_console_roles.py`` the console's roles, Host/Origin checks and secrets, and
``test_origins_and_secrets.py`` configured allow-lists and secrets while a connector fails.
``attack.py`` holds the logins, the grants (the one source of both the ``[[authorization]]``
entries and the expectations) and raw HTTP/STOMP helpers; ``conftest.py`` the shared gateways.
"""
