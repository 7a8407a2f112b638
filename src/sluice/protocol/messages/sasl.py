"""SaslHandshake (17), SaslAuthenticate (36) and SCRAM user management (KIP-554): DescribeUserScramCredentials
(50), AlterUserScramCredentials (51). Mechanism codes: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512."""

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

DESCRIBE_USER_SCRAM_CREDENTIALS = Api(
    key=50,
    name="DescribeUserScramCredentials",
    valid="0",
    flexible="0+",
    request="""
Users                   []UserName  null=v0+
  Name                  string
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ErrorMessage            string   null=v0+
Results                 []DescribeUserScramCredentialsResult
  User                  string
  ErrorCode             int16
  ErrorMessage          string   null=v0+
  CredentialInfos       []CredentialInfo
    Mechanism           int8
    Iterations          int32
""",
)

ALTER_USER_SCRAM_CREDENTIALS = Api(
    key=51,
    name="AlterUserScramCredentials",
    valid="0",
    flexible="0+",
    request="""
Deletions               []ScramCredentialDeletion
  Name                  string
  Mechanism             int8
Upsertions              []ScramCredentialUpsertion
  Name                  string
  Mechanism             int8
  Iterations            int32
  Salt                  bytes
  SaltedPassword        bytes
""",
    response="""
ThrottleTimeMs          int32
Results                 []AlterUserScramCredentialsResult
  User                  string
  ErrorCode             int16
  ErrorMessage          string   null=v0+
""",
)

APIS: list[Api] = [
    SASL_HANDSHAKE,
    SASL_AUTHENTICATE,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    ALTER_USER_SCRAM_CREDENTIALS,
]
