"""Delegation token APIs (KIP-48): CreateDelegationToken (38), RenewDelegationToken (39),
ExpireDelegationToken (40), DescribeDelegationToken (41).

Written from Kafka's message specs (clients/src/main/resources/common/message/*.json). Kafka 4.0 dropped v0 of
all four (KIP-896).
"""

from sluice.protocol.schema import Api

CREATE_DELEGATION_TOKEN = Api(
    key=38,
    name="CreateDelegationToken",
    valid="1-3",
    flexible="2+",
    request="""
OwnerPrincipalType      string   v3+  null=v3+
OwnerPrincipalName      string   v3+  null=v3+
Renewers                []CreatableRenewers
  PrincipalType         string
  PrincipalName         string
MaxLifetimeMs           int64
""",
    response="""
ErrorCode               int16
PrincipalType           string
PrincipalName           string
TokenRequesterPrincipalType  string  v3+
TokenRequesterPrincipalName  string  v3+
IssueTimestampMs        int64
ExpiryTimestampMs       int64
MaxTimestampMs          int64
TokenId                 string
Hmac                    bytes
ThrottleTimeMs          int32
""",
)

RENEW_DELEGATION_TOKEN = Api(
    key=39,
    name="RenewDelegationToken",
    valid="1-2",
    flexible="2+",
    request="""
Hmac                    bytes
RenewPeriodMs           int64
""",
    response="""
ErrorCode               int16
ExpiryTimestampMs       int64
ThrottleTimeMs          int32
""",
)

EXPIRE_DELEGATION_TOKEN = Api(
    key=40,
    name="ExpireDelegationToken",
    valid="1-2",
    flexible="2+",
    request="""
Hmac                    bytes
ExpiryTimePeriodMs      int64
""",
    response="""
ErrorCode               int16
ExpiryTimestampMs       int64
ThrottleTimeMs          int32
""",
)

DESCRIBE_DELEGATION_TOKEN = Api(
    key=41,
    name="DescribeDelegationToken",
    valid="1-3",
    flexible="2+",
    request="""
Owners                  []DescribeDelegationTokenOwner  null=v0+
  PrincipalType         string
  PrincipalName         string
""",
    response="""
ErrorCode               int16
Tokens                  []DescribedDelegationToken
  PrincipalType         string
  PrincipalName         string
  TokenRequesterPrincipalType  string  v3+
  TokenRequesterPrincipalName  string  v3+
  IssueTimestamp        int64
  ExpiryTimestamp       int64
  MaxTimestamp          int64
  TokenId               string
  Hmac                  bytes
  Renewers              []DescribedDelegationTokenRenewer
    PrincipalType       string
    PrincipalName       string
ThrottleTimeMs          int32
""",
)

APIS: list[Api] = [
    CREATE_DELEGATION_TOKEN,
    RENEW_DELEGATION_TOKEN,
    EXPIRE_DELEGATION_TOKEN,
    DESCRIBE_DELEGATION_TOKEN,
]
