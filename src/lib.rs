//! shardboot: PXE/iPXE-aware DHCPv4, TFTP and HTTP boot server.

pub mod tftp;
