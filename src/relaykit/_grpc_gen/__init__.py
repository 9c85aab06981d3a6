"""Generated protobuf code (scripts/gen-proto). Do not edit."""
