//! Shared helpers of the integration tests and the benchmark.
