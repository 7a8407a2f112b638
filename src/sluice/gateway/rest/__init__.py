"""Confluent's REST Proxy API (v2 and v3) served by the gateway beside kafka-pixy's APIs."""

from __future__ import annotations

from .server import RestProxy

__all__ = ["RestProxy"]
