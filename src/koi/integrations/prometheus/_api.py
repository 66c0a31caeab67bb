"""A small client for Prometheus' HTTP query API, on the standard library only."""

from __future__ import annotations

import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

import attrs

from koi.errors import KoiError

__all__ = ["PrometheusApi", "PrometheusError", "Sample", "Unreachable"]


class PrometheusError(KoiError, RuntimeError):
    """A Prometheus query failed; the message says which query and why.

    .. versionadded:: 0.1
    """


class Unreachable(PrometheusError):
    """Prometheus did not answer at all (connection refused, unknown host, TLS failure)."""


@attrs.frozen
class Sample:
    """One element of an instant vector: its labels and its value (NaN and ±Inf kept)."""

    labels: Mapping[str, str] = attrs.field(hash=False)
    value: float


def _value(text: object) -> float:
    # Prometheus writes sample values as strings: "1.5", "NaN", "+Inf", "-Inf".
    if not isinstance(text, str):
        raise ValueError(f"sample value {text!r} is not a string")
    return float(text)


@attrs.frozen
class PrometheusApi:
    """``GET {url}/api/v1/query`` with a time-out per call.

    ``timeout_s`` bounds each call on the client (socket time-out) and is passed to Prometheus
    as the query's own ``timeout`` so that the server gives up at the same time.
    """

    url: str
    timeout_s: float = 5.0
    headers: Mapping[str, str] = attrs.field(factory=dict, hash=False)

    def query(self, promql: str, at: float) -> list[Sample]:
        """Evaluate ``promql`` at unix time ``at``; return its instant vector.

        Raises
        ------
        Unreachable
            No connection could be made.
        PrometheusError
            A time-out, an HTTP or API error, or an answer that is not an instant vector.
        """
        params = urllib.parse.urlencode(
            {"query": promql, "time": f"{at:.3f}", "timeout": f"{self.timeout_s:g}s"}
        )
        endpoint = f"{self.url.rstrip('/')}/api/v1/query?{params}"
        request = urllib.request.Request(endpoint, headers=dict(self.headers))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                body = reply.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            detail = _api_error(body) or exc.reason
            raise PrometheusError(f"{self.url}: HTTP {exc.code} for {promql!r}: {detail}") from None
        except TimeoutError:
            msg = f"{self.url}: query timed out after {self.timeout_s:g} s: {promql!r}"
            raise PrometheusError(msg) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError | socket.timeout):
                msg = f"{self.url}: query timed out after {self.timeout_s:g} s: {promql!r}"
                raise PrometheusError(msg) from None
            raise Unreachable(f"{self.url}: Prometheus is unreachable ({exc.reason})") from None
        except (ConnectionError, OSError) as exc:
            raise Unreachable(f"{self.url}: Prometheus is unreachable ({exc})") from None
        return _parse(self.url, promql, body)


def _api_error(body: bytes) -> str:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    if isinstance(data, dict):
        return f"{data.get('errorType', 'error')}: {data.get('error', '')}"
    return ""


def _parse(url: str, promql: str, body: bytes) -> list[Sample]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise PrometheusError(f"{url}: answer to {promql!r} is not JSON") from None
    if not isinstance(data, dict) or data.get("status") != "success":
        detail = _api_error(body) or "no status"
        raise PrometheusError(f"{url}: query {promql!r} failed: {detail}")
    result = data.get("data", {})
    if not isinstance(result, dict) or result.get("resultType") != "vector":
        kind = result.get("resultType") if isinstance(result, dict) else type(result).__name__
        raise PrometheusError(f"{url}: {promql!r} returned {kind!r}, not an instant vector")
    out = []
    for item in result.get("result", ()):
        try:
            labels = item["metric"]
            _, text = item["value"]
            value = _value(text)
        except (KeyError, TypeError, ValueError) as exc:
            raise PrometheusError(
                f"{url}: malformed sample in answer to {promql!r}: {exc}"
            ) from None
        if not isinstance(labels, dict):
            raise PrometheusError(f"{url}: malformed labels in answer to {promql!r}")
        out.append(Sample({str(k): str(v) for k, v in labels.items()}, value))
    return out


def finite_non_negative(value: float) -> bool:
    return math.isfinite(value) and value >= 0
