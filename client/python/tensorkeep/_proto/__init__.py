"""Modules generated from proto/tensorkeep.proto by the build (never committed):
tensorkeep_pb2 (messages) and tensorkeep_pb2_grpc (the TensorKeep service stub)."""
