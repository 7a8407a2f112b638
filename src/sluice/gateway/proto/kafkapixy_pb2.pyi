from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RecordHeader(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class ProdRq(_message.Message):
    __slots__ = ("cluster", "topic", "key_value", "key_undefined", "message", "async_mode", "headers")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_VALUE_FIELD_NUMBER: _ClassVar[int]
    KEY_UNDEFINED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ASYNC_MODE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    key_value: bytes
    key_undefined: bool
    message: bytes
    async_mode: bool
    headers: _containers.RepeatedCompositeFieldContainer[RecordHeader]
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., key_value: _Optional[bytes] = ..., key_undefined: _Optional[bool] = ..., message: _Optional[bytes] = ..., async_mode: _Optional[bool] = ..., headers: _Optional[_Iterable[_Union[RecordHeader, _Mapping]]] = ...) -> None: ...

class ProdRs(_message.Message):
    __slots__ = ("partition", "offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ConsNAckRq(_message.Message):
    __slots__ = ("cluster", "topic", "group", "no_ack", "auto_ack", "ack_partition", "ack_offset")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NO_ACK_FIELD_NUMBER: _ClassVar[int]
    AUTO_ACK_FIELD_NUMBER: _ClassVar[int]
    ACK_PARTITION_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    group: str
    no_ack: bool
    auto_ack: bool
    ack_partition: int
    ack_offset: int
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., group: _Optional[str] = ..., no_ack: _Optional[bool] = ..., auto_ack: _Optional[bool] = ..., ack_partition: _Optional[int] = ..., ack_offset: _Optional[int] = ...) -> None: ...

class ConsRs(_message.Message):
    __slots__ = ("partition", "offset", "key_value", "key_undefined", "message", "headers")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEY_VALUE_FIELD_NUMBER: _ClassVar[int]
    KEY_UNDEFINED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    key_value: bytes
    key_undefined: bool
    message: bytes
    headers: _containers.RepeatedCompositeFieldContainer[RecordHeader]
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., key_value: _Optional[bytes] = ..., key_undefined: _Optional[bool] = ..., message: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[RecordHeader, _Mapping]]] = ...) -> None: ...

class AckRq(_message.Message):
    __slots__ = ("cluster", "topic", "group", "partition", "offset")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    group: str
    partition: int
    offset: int
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., group: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class AckRs(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("partition", "begin", "end", "count", "offset", "lag", "metadata", "sparse_acks")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SPARSE_ACKS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    begin: int
    end: int
    count: int
    offset: int
    lag: int
    metadata: str
    sparse_acks: str
    def __init__(self, partition: _Optional[int] = ..., begin: _Optional[int] = ..., end: _Optional[int] = ..., count: _Optional[int] = ..., offset: _Optional[int] = ..., lag: _Optional[int] = ..., metadata: _Optional[str] = ..., sparse_acks: _Optional[str] = ...) -> None: ...

class GetOffsetsRq(_message.Message):
    __slots__ = ("cluster", "topic", "group")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    group: str
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class GetOffsetsRs(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("partition", "leader", "replicas", "isr")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    partition: int
    leader: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., leader: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ...) -> None: ...

class GetTopicMetadataRq(_message.Message):
    __slots__ = ("cluster", "topic", "with_partitions")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    WITH_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    with_partitions: bool
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., with_partitions: _Optional[bool] = ...) -> None: ...

class GetTopicMetadataRs(_message.Message):
    __slots__ = ("version", "config", "partitions")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    version: int
    config: _containers.ScalarMap[str, str]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    def __init__(self, version: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ...) -> None: ...

class ListTopicRs(_message.Message):
    __slots__ = ("topics",)
    class TopicsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: GetTopicMetadataRs
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[GetTopicMetadataRs, _Mapping]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.MessageMap[str, GetTopicMetadataRs]
    def __init__(self, topics: _Optional[_Mapping[str, GetTopicMetadataRs]] = ...) -> None: ...

class ListTopicRq(_message.Message):
    __slots__ = ("cluster", "with_partitions")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    WITH_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    with_partitions: bool
    def __init__(self, cluster: _Optional[str] = ..., with_partitions: _Optional[bool] = ...) -> None: ...

class ListConsumersRq(_message.Message):
    __slots__ = ("cluster", "topic", "group")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    group: str
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class ConsumerPartitions(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ConsumerGroups(_message.Message):
    __slots__ = ("consumers",)
    class ConsumersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ConsumerPartitions
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ConsumerPartitions, _Mapping]] = ...) -> None: ...
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    consumers: _containers.MessageMap[str, ConsumerPartitions]
    def __init__(self, consumers: _Optional[_Mapping[str, ConsumerPartitions]] = ...) -> None: ...

class ListConsumersRs(_message.Message):
    __slots__ = ("groups",)
    class GroupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ConsumerGroups
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ConsumerGroups, _Mapping]] = ...) -> None: ...
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.MessageMap[str, ConsumerGroups]
    def __init__(self, groups: _Optional[_Mapping[str, ConsumerGroups]] = ...) -> None: ...

class SetOffsetsRq(_message.Message):
    __slots__ = ("cluster", "topic", "group", "offsets")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    group: str
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class SetOffsetsRs(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionOffsetRef(_message.Message):
    __slots__ = ("partition", "offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ConsBatchRq(_message.Message):
    __slots__ = ("cluster", "topic", "group", "acks", "max_messages", "wait_ms")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    group: str
    acks: _containers.RepeatedCompositeFieldContainer[PartitionOffsetRef]
    max_messages: int
    wait_ms: int
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., group: _Optional[str] = ..., acks: _Optional[_Iterable[_Union[PartitionOffsetRef, _Mapping]]] = ..., max_messages: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ConsBatchRs(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ConsRs]
    def __init__(self, messages: _Optional[_Iterable[_Union[ConsRs, _Mapping]]] = ...) -> None: ...

class ConsStreamRq(_message.Message):
    __slots__ = ("cluster", "topic", "group", "acks", "credit")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    topic: str
    group: str
    acks: _containers.RepeatedCompositeFieldContainer[PartitionOffsetRef]
    credit: int
    def __init__(self, cluster: _Optional[str] = ..., topic: _Optional[str] = ..., group: _Optional[str] = ..., acks: _Optional[_Iterable[_Union[PartitionOffsetRef, _Mapping]]] = ..., credit: _Optional[int] = ...) -> None: ...
