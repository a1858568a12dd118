//! The seccomp profile every task container runs under: nothing in it can trace, read or write
//! another process's memory (`ptrace`, `process_vm_readv`/`process_vm_writev`, `pidfd_getfd`,
//! `kcmp`), so an agent cannot inject code into a process it does not own (the keep-alive, the
//! image's services, the tests) and have that process write its grade.
//!
//! Docker's own default profile allows `ptrace` (kernels from 4.8 on), and a container can have
//! one profile only, so this one also refuses what that default refuses to a container without
//! extra capabilities: namespaces, mounts, kernel modules and keyrings, clocks, `bpf`,
//! `perf_event_open`, `userfaultfd`, `io_uring` and the rest below. Everything else is allowed:
//! what the kernel itself checks against the container's (dropped) capabilities stays checked.

/// Refused with `EPERM`, on every architecture a container of this machine may run.
const REFUSED: &[&str] = &[
    // Another process's memory, and what reaches it.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    // As Docker's default refuses them.
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "sysfs",
    "_sysctl",
    "syslog",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// `clone` flags that make a namespace: a `clone` with any of them is refused, as `unshare` is.
const NAMESPACE_FLAGS: &[u64] = &[
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// What a task that may trace its own processes (`EnvSpec::ptrace`) is still refused: the rest.
const TRACING: &[&str] = &["ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"];

/// The profile, as Docker's `seccomp=` security option takes it (the profile's JSON itself);
/// with `ptrace`, the tracing calls are allowed (Docker's default allows them too).
pub fn profile(ptrace: bool) -> String {
    let refused: Vec<&str> = REFUSED.iter().copied().filter(|n| !(ptrace && TRACING.contains(n))).collect();
    let mut rules = vec![serde_json::json!({
        "names": refused, "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
    })];
    // `clone3` passes its flags in memory a filter cannot read: "not implemented", so that the C
    // library falls back to `clone`, whose flags are checked.
    rules.push(serde_json::json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}));
    for flag in NAMESPACE_FLAGS {
        rules.push(serde_json::json!({
            "names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
            "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
        }));
    }
    serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": rules,
    })
    .to_string()
}

/// The security options of a task container: no privilege gained by `exec` (set-uid programs),
/// and [`profile`].
pub fn security_options(ptrace: bool) -> Vec<String> {
    vec!["no-new-privileges".into(), format!("seccomp={}", profile(ptrace))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_refuses_another_processs_memory_and_what_dockers_default_refuses() {
        let p: serde_json::Value = serde_json::from_str(&profile(false)).unwrap();
        assert_eq!(p["defaultAction"], "SCMP_ACT_ALLOW");
        let refused: Vec<&str> =
            p["syscalls"][0]["names"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
        for name in ["ptrace", "process_vm_writev", "process_vm_readv", "pidfd_getfd", "unshare", "mount", "bpf"] {
            assert!(refused.contains(&name), "{name} is refused");
        }
        let clones = p["syscalls"].as_array().unwrap().iter().filter(|r| r["names"][0] == "clone").count();
        assert_eq!(clones, NAMESPACE_FLAGS.len(), "each namespace flag of clone is its own rule");
        let opts = security_options(false);
        assert!(opts[0] == "no-new-privileges" && opts[1].starts_with("seccomp={"), "{opts:?}");
        // A debugging task may trace; the rest is refused all the same.
        let p: serde_json::Value = serde_json::from_str(&profile(true)).unwrap();
        let refused: Vec<&str> =
            p["syscalls"][0]["names"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
        assert!(!refused.contains(&"ptrace") && refused.contains(&"mount"), "{refused:?}");
    }
}
