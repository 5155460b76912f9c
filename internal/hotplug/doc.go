// Package hotplug changes which GPU device nodes a running container can
// use, without restarting it: it creates and removes the nodes inside the
// container's mount namespace and allows or denies them in the container's
// device cgroup (v1 devices.allow/deny, or a BPF_PROG_TYPE_CGROUP_DEVICE
// program on cgroup v2). Every change goes from the state it reads back from
// the kernel to the state asked for, so repeating it is harmless and an agent
// restarted mid-change finishes the job without leaking rules or programs.
//
// Device rules are opencontainers/cgroups' devices/config.Rule and the device
// cgroup is written by that library's setters (cgroups.DevicesSetV1/V2, the
// ones runc uses): its emulator decides the v1 transition and the v2 program,
// refuses to punch a hole in a wildcard rule, and replaces the attached v2
// program. What stays here is what the library does not export or do:
//   - ParseDevicesList: its devices.list parser is unexported, and on v1 the
//     target must start from the kernel's current exceptions (which include
//     what the runtime added beyond the OCI config, e.g. runc's defaults);
//   - Target and AllowsAll: the rule list for "these GPUs and no other
//     managed one" on top of a container's rules, and the refusal of a
//     container that allows every device (privileged);
//   - Programs: its v2 program is built and attached unnamed and unexported,
//     so skipping an unchanged program is done by remembering the attached
//     program's tag per rule list;
//   - refusing inside a user namespace, where the setters silently write
//     nothing;
//   - RuntimeDefaultRules: the rules runtimes add after a container's OCI
//     config (runc's defaults are in runc, not in the cgroups library), needed
//     to rebuild the v2 program the runtime attached;
//   - the device nodes (SyncNodes), which the library does not create in
//     another process's mount namespace.
package hotplug
