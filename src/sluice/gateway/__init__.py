"""kafka-pixy compatible gateway: gRPC and HTTP in front of any Kafka cluster.

See `sluice.gateway.server` for the entry points the CLI calls.
"""

from .config import ConfigError, GatewayConfig
from .config_file import config_from_dict, load_config, single_cluster_config
from .server import Gateway, run_gateway, serve_forever

__all__ = [
    "ConfigError",
    "Gateway",
    "GatewayConfig",
    "config_from_dict",
    "load_config",
    "run_gateway",
    "serve_forever",
    "single_cluster_config",
]
