"""One Protobuf message for the registry-format tests, as a class built from descriptors the way generated
code would be (no protoc run). As .proto text (package shop, proto3, importing google/protobuf/timestamp.proto):

    message Order {
      int64 id = 1;
      repeated string lines = 2;
      Status status = 3;                      // enum Status { NEW = 0; PAID = 1; }
      google.protobuf.Timestamp placed = 4;
      map<string, int32> stock = 5;
      optional string coupon = 6;
      uint64 big = 7;
    }
"""

from __future__ import annotations


def order_message_class() -> type:
    """shop.Order as a message class."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    file = descriptor_pb2.FileDescriptorProto(name="shop.proto", package="shop", syntax="proto3")
    file.dependency.append("google/protobuf/timestamp.proto")
    field = descriptor_pb2.FieldDescriptorProto
    order = file.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=field.TYPE_INT64)
    order.field.add(name="lines", number=2, type=field.TYPE_STRING, label=field.LABEL_REPEATED)
    order.field.add(name="status", number=3, type=field.TYPE_ENUM, type_name=".shop.Status")
    order.field.add(name="placed", number=4, type=field.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    entry = order.nested_type.add(name="StockEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING)
    entry.field.add(name="value", number=2, type=field.TYPE_INT32)
    order.field.add(
        name="stock",
        number=5,
        type=field.TYPE_MESSAGE,
        type_name=".shop.Order.StockEntry",
        label=field.LABEL_REPEATED,
    )
    order.oneof_decl.add(name="_coupon")
    order.field.add(name="coupon", number=6, type=field.TYPE_STRING, oneof_index=0, proto3_optional=True)
    order.field.add(name="big", number=7, type=field.TYPE_UINT64)
    status = file.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
