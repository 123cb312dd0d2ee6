"""SASL: SaslHandshake and SaslAuthenticate; a user's organisation becomes the connection's org_id.

Version notes:
- SaslHandshake 0–1: v1 means the tokens follow in SaslAuthenticate requests; v0
  means they follow as raw size-prefixed SASL tokens (no Kafka header), answered
  raw, and a failure just closes the connection (Kafka's legacy flow).
- SaslAuthenticate 0–2: v1+ answers ``session_lifetime_ms`` =
  ``--connections-max-reauth-ms`` (Kafka's ``connections.max.reauth.ms``, KIP-368).
  At 0, Kafka's default, a session never expires and a SaslHandshake on an
  authenticated connection is answered ILLEGAL_SASL_STATE (the connection stays).
  Above 0 a client re-authenticates with SaslHandshake v1 + SaslAuthenticate before
  its session expires, and a connection whose session has expired is closed at its
  next request, as Kafka's SocketServer does. A re-authentication must keep the
  mechanism and the principal (and so the organisation), or it fails and the
  connection closes.
Failure handling follows Kafka's SaslServerAuthenticator: a mechanism that
``--sasl-enabled-mechanisms`` (Kafka's ``sasl.enabled.mechanisms``) leaves out is
answered UNSUPPORTED_SASL_MECHANISM (33) with the enabled list, and wrong credentials
SASL_AUTHENTICATION_FAILED (58) with a message, both after a 100 ms delay
(``connection.failed.authentication.delay.ms``) and then the connection is closed.
SASL requests out of sequence get ILLEGAL_SASL_STATE (34); before authentication
that also closes the connection. Without ``--auth-users`` both APIs answer
ILLEGAL_SASL_STATE, like a PLAINTEXT Kafka listener.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rafka.gateway import auth
from rafka.gateway.api import RequestContext, api
from rafka.gateway.server import CLOSE_AFTER, KafkaConnection, current_connection

log = logging.getLogger("rafka.gateway.auth")

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
FAILED_AUTHENTICATION_DELAY = 0.1  # Kafka's connection.failed.authentication.delay.ms default


def _mechanisms(conn: KafkaConnection) -> list[str]:
    return conn.gw.sasl_mechanisms if conn.gw.users is not None else []


@api(17, 0, 1, "sasl.handshake")
async def sasl_handshake(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    conn = current_connection()
    state = conn.auth
    users = conn.gw.users
    if users is None:
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
    mechanism = req.get("mechanism") or ""
    enabled = _mechanisms(conn)
    if state.exchange is not None:
        log.warning("closing connection from %s: SaslHandshake during an unfinished SASL exchange", conn.peer)
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": enabled, CLOSE_AFTER: True}
    if state.authenticated and not conn.gw.config.connections_max_reauth_ms:
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}  # re-authentication is off, as in Kafka
    if state.authenticated and ctx.api_version < 1:
        log.warning("closing connection from %s: re-authentication needs SaslHandshake v1+", conn.peer)
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": enabled, CLOSE_AFTER: True}
    if mechanism not in enabled or (state.authenticated and mechanism != state.mechanism):
        auth.auth_metrics().labels(mechanism if mechanism in auth.MECHANISMS else "other",
                                   "unsupported_mechanism").inc()
        conn.stop_reading()
        log.warning("closing connection from %s: SASL mechanism %r is not %s (enabled: %s)", conn.peer,
                    mechanism, "the one it authenticated with" if state.authenticated else "enabled",
                    ", ".join(enabled))
        await asyncio.sleep(FAILED_AUTHENTICATION_DELAY)
        return {"error_code": UNSUPPORTED_SASL_MECHANISM,
                "mechanisms": [state.mechanism] if state.authenticated else enabled, CLOSE_AFTER: True}
    state.exchange = auth.new_exchange(mechanism, users)
    state.raw = ctx.api_version == 0
    return {"error_code": 0, "mechanisms": enabled}


def _fail(conn: KafkaConnection, mechanism: str, message: str) -> None:
    state = conn.auth
    state.exchange = None
    state.raw = False
    auth.auth_metrics().labels(mechanism, "failure").inc()
    log.warning("SASL %s authentication failed for %s%s: %s", mechanism, conn.peer,
                f" (authenticated as {state.principal})" if state.authenticated else "", message)
    conn.stop_reading()


def _step(conn: KafkaConnection, token: bytes) -> tuple[bytes | None, str | None]:
    """Feed ``token`` to the connection's exchange: (reply, None) or (None, error message)."""
    state = conn.auth
    exchange = state.exchange
    assert exchange is not None
    mechanism = exchange.mechanism
    try:
        reply = exchange.step(token)
    except auth.AuthError as exc:
        _fail(conn, mechanism, str(exc))
        if exc.shown:
            return None, str(exc)
        # Kafka's SaslServerAuthenticator: the SaslException's own text may reveal which users exist
        during = "re-authentication" if state.authenticated else "authentication"
        return None, f"Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}"
    if not exchange.complete:
        return reply, None
    user = exchange.user
    assert user is not None
    if state.authenticated and (user.name != state.principal or user.org != state.org):
        message = (f"Cannot change principals during re-authentication from {state.principal} "
                   f"(org {state.org}): {user.name} (org {user.org})")
        _fail(conn, mechanism, message)
        return None, message
    again = state.authenticated
    state.succeed(user, mechanism, conn.gw.config.connections_max_reauth_ms)
    conn.org_id = user.org
    conn.decoder.max_frame_bytes = conn.gw.config.max_request_bytes  # the pre-authentication limit goes
    auth.auth_metrics().labels(mechanism, "success").inc()
    log.debug("%s %s as %s (org %s) with %s", conn.peer, "re-authenticated" if again else "authenticated",
             user.name, user.org, mechanism)
    return reply, None


@api(36, 0, 2, "sasl.authenticate")
async def sasl_authenticate(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    conn = current_connection()
    state = conn.auth
    if conn.gw.users is None:
        return {"error_code": ILLEGAL_SASL_STATE, "error_message": "SASL authentication is not enabled",
                "auth_bytes": b"", "session_lifetime": 0}
    if state.exchange is None:
        if state.authenticated:  # Kafka answers this and keeps the connection
            return {"error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime": 0,
                    "error_message": "SaslAuthenticate request received after successful authentication"}
        log.warning("closing connection from %s: SaslAuthenticate before SaslHandshake", conn.peer)
        return {"error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime": 0, CLOSE_AFTER: True,
                "error_message": "Unexpected SaslAuthenticate request before SaslHandshake"}
    reply, error = _step(conn, req.get("auth_bytes") or b"")
    if error is not None:
        await asyncio.sleep(FAILED_AUTHENTICATION_DELAY)
        return {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": error, "auth_bytes": b"",
                "session_lifetime": 0, CLOSE_AFTER: True}
    lifetime = conn.gw.config.connections_max_reauth_ms if state.exchange is None else 0  # set once complete
    return {"error_code": 0, "error_message": None, "auth_bytes": reply or b"", "session_lifetime": lifetime}


def raw_token(conn: KafkaConnection, token: bytes) -> bytes | None:
    """A raw SASL token after SaslHandshake v0: the raw reply, or None to close the connection."""
    reply, error = _step(conn, token)
    return None if error is not None else (reply or b"")
