"""Modules generated from proto/tensorkeep.proto and proto/limits.proto by the
build (never committed): tensorkeep_pb2 (messages), tensorkeep_pb2_grpc (the
TensorKeep service stub) and limits_pb2 (the limits the collector enforces)."""
