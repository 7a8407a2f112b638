"""ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

Kafka 4.0 dropped v0 of all three (KIP-896); clients still send v1 (librdkafka) and v2-3 (Java, flexible).
Codes in these messages: resource type (1 any, 2 topic, 3 group, 4 cluster, 5 transactional id), pattern
type (1 any, 2 match, 3 literal, 4 prefixed), operation and permission (2 deny, 3 allow), as in
`sluice.security.acl`.
"""

from sluice.protocol.schema import Api

DESCRIBE_ACLS = Api(
    key=29,
    name="DescribeAcls",
    valid="0-3",
    flexible="2+",
    request="""
ResourceTypeFilter      int8
ResourceNameFilter      string   null=v0+
PatternTypeFilter       int8     v1+  default=3
PrincipalFilter         string   null=v0+
HostFilter              string   null=v0+
Operation               int8
PermissionType          int8
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ErrorMessage            string   null=v0+
Resources               []DescribeAclsResource
  ResourceType          int8
  ResourceName          string
  PatternType           int8     v1+  default=3
  Acls                  []AclDescription
    Principal           string
    Host                string
    Operation           int8
    PermissionType      int8
""",
)

CREATE_ACLS = Api(
    key=30,
    name="CreateAcls",
    valid="0-3",
    flexible="2+",
    request="""
Creations               []AclCreation
  ResourceType          int8
  ResourceName          string
  ResourcePatternType   int8     v1+  default=3
  Principal             string
  Host                  string
  Operation             int8
  PermissionType        int8
""",
    response="""
ThrottleTimeMs          int32
Results                 []AclCreationResult
  ErrorCode             int16
  ErrorMessage          string   null=v0+
""",
)

DELETE_ACLS = Api(
    key=31,
    name="DeleteAcls",
    valid="0-3",
    flexible="2+",
    request="""
Filters                 []DeleteAclsFilter
  ResourceTypeFilter    int8
  ResourceNameFilter    string   null=v0+
  PatternTypeFilter     int8     v1+  default=3
  PrincipalFilter       string   null=v0+
  HostFilter            string   null=v0+
  Operation             int8
  PermissionType        int8
""",
    response="""
ThrottleTimeMs          int32
FilterResults           []DeleteAclsFilterResult
  ErrorCode             int16
  ErrorMessage          string   null=v0+
  MatchingAcls          []DeleteAclsMatchingAcl
    ErrorCode           int16
    ErrorMessage        string   null=v0+
    ResourceType        int8
    ResourceName        string
    PatternType         int8     v1+  default=3
    Principal           string
    Host                string
    Operation           int8
    PermissionType      int8
""",
)

APIS: list[Api] = [DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS]
