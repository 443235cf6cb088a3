//! MAC spoof check on the host end of a container's veth (nftables bridge family).
