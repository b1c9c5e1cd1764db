"""mrc-fabric: multi-plane leaf-spine SRv6 fabrics in network namespaces."""
