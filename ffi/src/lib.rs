//! oxccl C ABI (filled by the C ABI issue).
