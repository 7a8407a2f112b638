"""SaslHandshake (17) and SaslAuthenticate (36)."""

from sluice.protocol.schema import Api

SASL_HANDSHAKE = Api(
    key=17,
    name="SaslHandshake",
    valid="0-1",
    flexible="none",
    request="""
Mechanism               string
""",
    response="""
ErrorCode               int16
Mechanisms              []string
""",
)

SASL_AUTHENTICATE = Api(
    key=36,
    name="SaslAuthenticate",
    valid="0-2",
    flexible="2+",
    request="""
AuthBytes               bytes
""",
    response="""
ErrorCode               int16
ErrorMessage            string   null=v0+
AuthBytes               bytes
SessionLifetimeMs       int64    v1+  default=0
""",
)

APIS: list[Api] = [SASL_HANDSHAKE, SASL_AUTHENTICATE]
