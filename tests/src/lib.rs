//! End-to-end test harness for sibyl (filled in by the foundation tests).
