"""kafka-pixy compatible protobuf definitions and their generated modules.

Regenerate after editing kafkapixy.proto (from the repository root)::

    .venv/bin/python -m grpc_tools.protoc -I src --python_out=src \
        --grpc_python_out=src src/sluice/gateway/proto/kafkapixy.proto

Generating from ``src`` makes the generated gRPC module import its message module
through the package path, so it works without touching ``sys.path``.
"""
