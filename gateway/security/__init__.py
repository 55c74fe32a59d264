"""Security: who may connect (authentication, password checks, the failed-login throttle), what a
login may do (destination authorization), TLS contexts, and keeping secrets out of logs.

Below the STOMP, admin and connector layers; it knows no connector, broker or session.
"""
