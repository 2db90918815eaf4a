//! Example programs live in `examples/`.
