"""Trust no client: signed impression ids bound to whom they were served, limits per client
and per impression (counted by :mod:`reranker.serving.limits`), API keys, the client's address
behind a proxy (docs/reference/security.md); the per-client bound on what training learns is
:mod:`reranker.models.budget`.

An impression id is a token the service signs (:class:`ImpressionSigner`)::

    <kid>.<base64url of: 16 random bytes, issue time (4 bytes), binding tag (8), MAC (16)>

The MAC is HMAC-SHA256 (truncated to 128 bits) over the rest, under the key named by
``kid``; the binding tag is a keyed hash of the user (``user_id``) or, without one, the
session (``session_id``) the page was served to, or of no one for a page served without
either. The token is the impression's id in the event store too, so nothing else changes
there. A click or reward is refused, and counted by reason (:attr:`TrustGuard.rejected`),
when its id is

* ``forged``: not a token, a key id no configured key has, or a MAC that does not verify;
* ``expired``: issued more than ``security.impression_ttl`` seconds ago;
* ``foreign``: served to a user or session other than the ``user_id`` / ``session_id`` the
  click carries;
* ``replayed``: its page was already closed and trained on (the store refuses it);

or when the client is over its limits (``rate_limited``) or the impression has had
``security.clicks_per_impression`` click requests (``impression_limit``). Repeating a click
already recorded stays harmless and is answered 202 with ``duplicate: true`` (a browser's
beacon may be sent twice): the store keeps one click per result and page.

Keys come from the environment variable that ``security.signing_keys_env`` names
(``kid:secret,kid:secret``: the first signs, all verify, so a new key is added first and
the old one dropped after ``impression_ttl``). Without it, a secret made once and kept in
the event store signs (:meth:`reranker.stores.EventStore.signing_secret`): every process and
machine sharing the store signs and verifies with the same key.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import hashlib
import hmac
import os
import re
import secrets
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reranker.core.errors import (
    ConfigError,
    ForbiddenError,
    GoneError,
    RerankerError,
    TooManyRequestsError,
)
from reranker.models.budget import CLIENT_PARTS
from reranker.serving.checks import check_client
from reranker.serving.limits import ImpressionCounter, RateLimiter, SharedCounts
from reranker.stores import Coordination

#: Bytes of a token: random id, issue time, binding tag, MAC.
_ID, _TIME, _BIND, _MAC = 16, 4, 8, 16
_PAYLOAD = _ID + _TIME + _BIND
_TOKEN_BYTES = _PAYLOAD + _MAC
#: A key id: what a token starts with, before the dot.
KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,16}")
#: Shortest secret accepted from the environment, in characters.
MIN_SECRET = 16
#: The key id of the secret kept in the event store.
STORE_KEY_ID = "s"
#: Seconds a token's issue time may lie in the future (clocks of machines sharing a store).
CLOCK_SKEW = 300.0
#: Domain separation of the MAC and of the binding tag.
_MAC_LABEL, _BIND_LABEL, _ADDRESS_LABEL = b"reranker impression\0", b"reranker bind\0", \
    b"reranker address\0"

#: Reasons a click, reward or search is refused, as :attr:`TrustGuard.rejected` counts them.
REASONS = ("forged", "expired", "foreign", "replayed", "impression_limit", "rate_limited",
           "unauthorized")


def rejection(error, reason: str):
    """``error`` tagged with the ``reason`` it is counted under."""
    error.reason = reason
    return error


@dataclass(frozen=True)
class Binding:
    """Whom a page was served to: its user, else its session, else no one."""

    kind: str  # "user", "session" or ""
    value: str

    @classmethod
    def of(cls, user_id: str | None, session_id: str | None) -> Binding:
        if user_id:
            return cls("user", user_id)
        if session_id:
            return cls("session", session_id)
        return cls("", "")


class ImpressionSigner:
    """Signs impression ids and verifies them: ``keys`` is a list of ``(kid, secret)``, the
    first signing."""

    def __init__(self, keys: list[tuple[str, bytes]], ttl: float,
                 clock: Callable[[], float] = time.time):
        if not keys:
            raise ValueError("at least one signing key is needed")
        self.keys = dict(keys)
        self.kid, self._secret = keys[0]
        self.ttl = ttl
        self.clock = clock

    @classmethod
    def from_config(cls, config, events: Coordination, environ: Mapping[str, str] | None = None
                    ) -> ImpressionSigner:
        """The keys of ``security.signing_keys_env``, else the event store's secret."""
        security = config.security
        environ = os.environ if environ is None else environ
        name = security.signing_keys_env
        text = environ.get(name, "").strip()
        if text:
            return cls(parse_keys(text, name), security.impression_ttl)
        secret = events.signing_secret()
        return cls([(STORE_KEY_ID, secret.encode("utf-8"))], security.impression_ttl)

    def sign(self, binding: Binding, now: float | None = None) -> str:
        """A new impression id, issued now to ``binding``."""
        issued = int(self.clock() if now is None else now)
        payload = (secrets.token_bytes(_ID) + struct.pack(">I", issued)
                   + self._tag(self._secret, binding))
        return f"{self.kid}.{_b64(payload + self._mac(self._secret, payload))}"

    def verify(self, token: str, user_id: str | None, session_id: str | None,
               now: float | None = None) -> None:
        """Raise the error a click or reward with ``token`` and these ids gets, tagged with
        its reason (``forged``, ``expired``, ``foreign``); return when all is well."""
        secret, payload = self._open(token)
        issued = struct.unpack(">I", payload[_ID:_ID + _TIME])[0]
        now = self.clock() if now is None else now
        if issued > now + CLOCK_SKEW:
            raise _forged("its issue time lies in the future")
        if now - issued > self.ttl:
            raise rejection(GoneError(
                f"'impression_id' has expired: it was issued {now - issued:.0f} s ago, and "
                f"clicks and rewards are accepted for {self.ttl:g} s "
                f"(security.impression_ttl)", field="impression_id"), "expired")
        tag = payload[_ID + _TIME:]
        offered = {Binding("", "")}
        if user_id:
            offered.add(Binding("user", user_id))
        if session_id:
            offered.add(Binding("session", session_id))
        if not any(hmac.compare_digest(tag, self._tag(secret, b)) for b in offered):
            field = "user_id" if user_id or not session_id else "session_id"
            raise rejection(ForbiddenError(
                "'impression_id' was served to another user or session: send the user_id "
                "(or, without one, the session_id) that the search gave", field=field),
                "foreign")

    def issued(self, token: str) -> float:
        """When ``token`` was issued (seconds since the epoch, to the second); a ``forged``
        error unless it is a genuine impression id."""
        _, payload = self._open(token)
        return float(struct.unpack(">I", payload[_ID:_ID + _TIME])[0])

    def check(self, token: str) -> None:
        """Raise a ``forged`` error unless ``token`` is a genuine impression id (whatever
        its age and binding)."""
        self._open(token)

    def address_key(self, address: str) -> str:
        """A keyed hash of a client address: what the event store keeps instead of it."""
        digest = hmac.new(self._secret, _ADDRESS_LABEL + address.encode("utf-8"),
                          hashlib.sha256).digest()
        return _b64(digest[:12])

    def _open(self, token: str) -> tuple[bytes, bytes]:
        """The secret and payload of a token whose MAC verifies."""
        kid, dot, data = token.partition(".")
        if not dot or not KEY_ID.fullmatch(kid):
            raise _forged("it is not a signed impression id")
        secret = self.keys.get(kid)
        if secret is None:
            raise _forged("no configured key has its key id (was the key removed?)")
        try:
            raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        except (binascii.Error, ValueError):
            raise _forged("it is not a signed impression id") from None
        if len(raw) != _TOKEN_BYTES or _b64(raw) != data:
            raise _forged("it is not a signed impression id")
        payload, mac = raw[:_PAYLOAD], raw[_PAYLOAD:]
        if not hmac.compare_digest(mac, self._mac(secret, payload)):
            raise _forged("its signature does not verify")
        return secret, payload

    @staticmethod
    def _mac(secret: bytes, payload: bytes) -> bytes:
        return hmac.new(secret, _MAC_LABEL + payload, hashlib.sha256).digest()[:_MAC]

    @staticmethod
    def _tag(secret: bytes, binding: Binding) -> bytes:
        text = f"{binding.kind}\0{binding.value}".encode("utf-8")
        return hmac.new(secret, _BIND_LABEL + text, hashlib.sha256).digest()[:_BIND]


def _forged(why: str) -> ForbiddenError:
    return rejection(ForbiddenError(f"'impression_id' is not accepted: {why}",
                                    field="impression_id"), "forged")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def parse_keys(text: str, name: str) -> list[tuple[str, bytes]]:
    """``kid:secret,kid:secret`` from the environment variable ``name``; a
    :class:`ConfigError` naming the variable (never the secret) when malformed."""
    keys: list[tuple[str, bytes]] = []
    for number, item in enumerate(text.split(","), start=1):
        kid, colon, secret = item.strip().partition(":")
        if not colon or not KEY_ID.fullmatch(kid):
            raise ConfigError(f"environment variable {name}: entry {number} must be "
                              f"kid:secret with a key id of 1-16 letters, digits, '-' or '_'")
        if len(secret) < MIN_SECRET:
            raise ConfigError(f"environment variable {name}: the secret of key {kid!r} is "
                              f"shorter than {MIN_SECRET} characters (make one with "
                              f"`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
        if kid in dict(keys):
            raise ConfigError(f"environment variable {name}: key id {kid!r} is given twice")
        keys.append((kid, secret.encode("utf-8")))
    return keys


def client_key(user_id: str | None, session_id: str | None, address: str | None) -> str | None:
    """Who a request comes from, for its limits: its user, else its session, else its
    address (None: none of them, an in-process call)."""
    if user_id:
        return f"user:{user_id}"
    if session_id:
        return f"session:{session_id}"
    if address:
        return f"address:{address}"
    return None


def api_keys_from(config, environ: Mapping[str, str] | None = None) -> tuple[bytes, ...]:
    """The API keys of ``security.api_keys_env`` (none when it is null); a
    :class:`ConfigError` when it names a variable that is unset or empty."""
    name = config.security.api_keys_env
    if name is None:
        return ()
    environ = os.environ if environ is None else environ
    keys = tuple(k.strip().encode("utf-8") for k in environ.get(name, "").split(",")
                 if k.strip())
    if not keys:
        raise ConfigError(f"security.api_keys_env names the environment variable {name}, "
                          f"which is unset or empty: set it to the API keys (comma separated)")
    return keys


def reports_access(config) -> str:
    """Who may read the experiment's results (``security.reports_access``, its null
    resolved): ``public``, ``operator`` or ``api_key``; a :class:`ConfigError` when the
    credential it asks for is not configured."""
    access = config.security.reports_access
    if access is None:
        return "api_key" if config.security.api_keys_env else "public"
    if access == "operator" and not config.server.admin_token:
        raise ConfigError("security.reports_access is operator, but server.admin_token is "
                          "not set: set it (better as RERANKER_SERVER_ADMIN_TOKEN in the "
                          "environment), or choose public or api_key")
    if access == "api_key" and not config.security.api_keys_env:
        raise ConfigError("security.reports_access is api_key, but security.api_keys_env is "
                          "not set: name the environment variable that holds the API keys, "
                          "or choose public or operator")
    return access


class TrustGuard:
    """A service's signer, limits and API keys, and the count of what they refused."""

    def __init__(self, config, signer: ImpressionSigner, refused,
                 api_keys: tuple[bytes, ...] = (), events: Coordination | None = None,
                 exchanges=None):
        security = config.security
        self.signer = signer
        self.api_keys = api_keys
        self.proxy_header: str | None = security.trusted_proxy_header
        self.searches = (RateLimiter(security.searches_per_minute)
                         if security.searches_per_minute else None)
        self.clicks = (RateLimiter(security.clicks_per_minute)
                       if security.clicks_per_minute else None)
        # per network address, whatever ids its requests claim (the searches only without
        # API keys: with them, the site's own servers search for their users)
        self.address_searches = (RateLimiter(security.address_searches_per_minute)
                                 if security.address_searches_per_minute and not api_keys
                                 else None)
        self.address_clicks = (RateLimiter(security.address_clicks_per_minute)
                               if security.address_clicks_per_minute else None)
        self.per_impression = ImpressionCounter(security.clicks_per_impression,
                                                security.impression_ttl)
        #: The counts exchanged with the other processes of the store (None: each process
        #: limits on its own, ``security.limits_exchange: 0``).
        self.shared: SharedCounts | None = None
        if events is not None and security.limits_exchange:
            counters = {"impression": self.per_impression}
            counters.update({scope: limiter for scope, limiter in (
                ("search", self.searches), ("click", self.clicks),
                ("address_search", self.address_searches),
                ("address_click", self.address_clicks)) if limiter is not None})
            self.shared = SharedCounts(events, counters, security.limits_exchange,
                                       counted=exchanges)
        #: Requests refused, a Prometheus counter labelled ``endpoint`` and ``reason``
        #: (``("click", "forged")``, ...): the service's metrics, summed over its workers.
        self.refused = refused

    @classmethod
    def from_config(cls, config, events: Coordination, refused, exchanges=None) -> TrustGuard:
        return cls(config, ImpressionSigner.from_config(config, events), refused,
                   api_keys_from(config), events, exchanges)

    def start_sharing(self) -> None:
        """Exchange the counts with the other processes from now on (an opened service)."""
        if self.shared is not None:
            self.shared.start()

    def close(self) -> None:
        """Share this process's last counts and stop exchanging them."""
        if self.shared is not None:
            self.shared.close()

    def count(self, endpoint: str, reason: str) -> None:
        self.refused.labels(endpoint, reason).inc()

    def rejected_by_reason(self, endpoint: str) -> collections.Counter[str]:
        """What ``endpoint`` refused in this process, by reason."""
        return collections.Counter({
            sample.labels["reason"]: int(sample.value)
            for metric in self.refused.collect() for sample in metric.samples
            if sample.name.endswith("_total") and sample.labels["endpoint"] == endpoint})

    @contextlib.contextmanager
    def counting(self, endpoint: str) -> Iterator[None]:
        """Count a refusal raised in the block under its reason (see :func:`rejection`)."""
        try:
            yield
        except RerankerError as exc:
            reason = getattr(exc, "reason", None)
            if reason is not None:
                self.count(endpoint, reason)
            raise

    def reports_ok(self, access: str, given: str | None, admin_token: str | None) -> bool:
        """Whether ``given`` may read the experiment's results under ``access``
        (:func:`reports_access`): anyone when public, else the operator's token, or with
        ``api_key`` one of the API keys too."""
        if access == "public":
            return True
        if not given:
            return False
        token = bool(admin_token) and hmac.compare_digest(given.encode("utf-8"),
                                                          admin_token.encode("utf-8"))
        return token or (access == "api_key" and bool(self.api_keys)
                         and self.api_key_ok(given))

    def api_key_ok(self, given: str | None) -> bool:
        """Whether ``given`` is one of the API keys (always, when none is configured)."""
        if not self.api_keys:
            return True
        if not given:
            return False
        given_bytes = given.encode("utf-8")
        # Compare with every key, so the time taken says nothing about which one is close.
        return sum(hmac.compare_digest(given_bytes, key) for key in self.api_keys) > 0

    def limit(self, endpoint: str, client: str | None, address: str | None = None) -> None:
        """Raise a 429 when ``client`` is over its rate for ``endpoint`` (``search``, or
        ``click`` for clicks and rewards), or its network ``address`` is over the
        address's rate, whatever ids its requests claim (a script minting a new session id
        for every request is one address)."""
        search = endpoint == "search"
        for limiter, key, scope, per, who in (
                (self.searches if search else self.clicks, client, endpoint,
                 "searches_per_minute" if search else "clicks_per_minute", "this client"),
                (self.address_searches if search else self.address_clicks,
                 None if address is None else f"address:{address}", f"address_{endpoint}",
                 f"address_{'searches' if search else 'clicks'}_per_minute",
                 "this network address")):
            if limiter is None or key is None:
                continue
            wait = limiter.take(key)
            if wait:
                raise rejection(TooManyRequestsError(
                    f"too many requests from {who}: at most {int(limiter.capacity)} a minute "
                    f"(security.{per}); retry in "
                    f"{TooManyRequestsError.whole_seconds(wait)} s", retry_after=wait),
                    "rate_limited")
            if self.shared is not None:
                self.shared.note(scope, key)

    def verify(self, impression_id: str, user_id: Any, session_id: Any) -> None:
        """Raise a 403 (counted by reason) unless ``impression_id`` was signed here, is not
        expired, and was served to ``user_id`` or ``session_id`` (or to no one)."""
        check_client(user_id, session_id)
        self.signer.verify(impression_id, user_id, session_id)

    def logged_client(self, user_id: str | None, session_id: str | None,
                      address: str | None) -> str | None:
        """Who an impression is logged as served to (its ``user_id`` in the store, what
        the trainer bounds per client, :class:`reranker.models.budget.ClientBudget`): the
        user, else ``session:<session_id>``, else ``address:<keyed hash of the address>``;
        None for an in-process search with none. Without API keys the ids are the client's
        word, so the address's key follows them (``<id>\x1faddress:<key>``): the trainer
        bounds the address too, whatever ids it claims."""
        address_key = f"address:{self.signer.address_key(address)}" if address else None
        who = user_id or (f"session:{session_id}" if session_id else None)
        if who is None:
            return address_key
        if address_key is not None and not self.api_keys:
            return f"{who}{CLIENT_PARTS}{address_key}"
        return who

    def limit_impression(self, impression_id: str) -> None:
        wait = self.per_impression.take(impression_id)
        if wait:
            raise rejection(TooManyRequestsError(
                f"'impression_id' has had {self.per_impression.limit} click requests, the "
                f"most one page accepts (security.clicks_per_impression)",
                retry_after=wait, field="impression_id"), "impression_limit")
        if self.shared is not None:
            self.shared.note("impression", impression_id)
