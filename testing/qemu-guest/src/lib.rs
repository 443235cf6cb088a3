//! Shared qemu real-kernel test harness (being lifted out of plugins/rdma-sriov/qemu, issue 18).
