package sandbox

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// The seccomp filter denies, with EPERM, the system calls that let a sandboxed process
// read or steer another process of the same uid (bwrap's pid 1 holds its parent's
// environment in memory, reference §1 (a)), load kernel code, or reach the large kernel
// surfaces an agent never needs: ptrace, process_vm_readv/writev, pidfd_getfd,
// process_madvise, io_uring (which can also open sockets without socket(2)), kexec, bpf,
// perf_event_open, userfaultfd and the keyring calls. Everything else is allowed: the
// mount and network namespaces are the boundary, this is a second wall.
//
// bwrap loads the program (--seccomp FD) right before it executes the init, after
// setting no_new_privs, so the init and everything it starts run under it.

// Classic BPF opcodes and seccomp constants (linux/filter.h, linux/seccomp.h).
const (
	bpfLdWAbs  = 0x00 | 0x00 | 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK    = 0x05 | 0x10 | 0x00 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK    = 0x05 | 0x30 | 0x00 // BPF_JMP | BPF_JGE | BPF_K
	bpfRetK    = 0x06 | 0x00        // BPF_RET | BPF_K
	retAllow   = 0x7fff0000         // SECCOMP_RET_ALLOW
	retErrno   = 0x00050000         // SECCOMP_RET_ERRNO
	errnoEPERM = 1

	seccompDataNr   = 0 // offsetof(struct seccomp_data, nr)
	seccompDataArch = 4 // offsetof(struct seccomp_data, arch)

	auditArchX8664   = 0xc000003e
	auditArchAArch64 = 0xc00000b7
	x32SyscallBit    = 0x40000000
)

// seccompArch is what the filter needs to know about one architecture.
type seccompArch struct {
	audit uint32
	// denyX32 refuses x32 system calls, which share AUDIT_ARCH_X86_64 but carry
	// another number space.
	denyX32 bool
	denied  map[string]uint32
}

// seccompArchFor returns the syscall numbers for GOARCH (arch/x86/entry/syscalls/
// syscall_64.tbl and include/uapi/asm-generic/unistd.h).
func seccompArchFor(goarch string) (seccompArch, error) {
	switch goarch {
	case "amd64":
		return seccompArch{audit: auditArchX8664, denyX32: true, denied: map[string]uint32{
			"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
			"pidfd_getfd": 438, "process_madvise": 440,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"kexec_load": 246, "kexec_file_load": 320, "bpf": 321, "perf_event_open": 298,
			"userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249,
		}}, nil
	case "arm64":
		return seccompArch{audit: auditArchAArch64, denied: map[string]uint32{
			"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
			"pidfd_getfd": 438, "process_madvise": 440,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"kexec_load": 104, "kexec_file_load": 294, "bpf": 280, "perf_event_open": 241,
			"userfaultfd": 282, "keyctl": 219, "add_key": 217, "request_key": 218,
		}}, nil
	}
	return seccompArch{}, fmt.Errorf("no seccomp filter for architecture %s (only amd64 and arm64)", goarch)
}

type sockFilter struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// seccompProgram assembles the filter for goarch in the byte layout bwrap reads
// (an array of struct sock_filter in host byte order).
func seccompProgram(goarch string) ([]byte, error) {
	a, err := seccompArchFor(goarch)
	if err != nil {
		return nil, err
	}
	nrs := make([]uint32, 0, len(a.denied))
	for _, nr := range a.denied {
		nrs = append(nrs, nr)
	}
	sort.Slice(nrs, func(i, j int) bool { return nrs[i] < nrs[j] })

	// Layout: [arch check] [load nr] [x32 check] [one jeq per denied nr] ALLOW DENY.
	// Every jump goes forward to DENY, whose index is known once the length is.
	var prog []sockFilter
	n := 3 + len(nrs) + 2
	if a.denyX32 {
		n++
	}
	deny := n - 1
	jumpTo := func(target int) uint8 { return uint8(target - (len(prog) + 1)) }

	prog = append(prog, sockFilter{code: bpfLdWAbs, k: seccompDataArch})
	prog = append(prog, sockFilter{code: bpfJeqK, jt: 0, jf: jumpTo(deny), k: a.audit})
	prog = append(prog, sockFilter{code: bpfLdWAbs, k: seccompDataNr})
	if a.denyX32 {
		prog = append(prog, sockFilter{code: bpfJgeK, jt: jumpTo(deny), jf: 0, k: x32SyscallBit})
	}
	for _, nr := range nrs {
		prog = append(prog, sockFilter{code: bpfJeqK, jt: jumpTo(deny), jf: 0, k: nr})
	}
	prog = append(prog, sockFilter{code: bpfRetK, k: retAllow})
	prog = append(prog, sockFilter{code: bpfRetK, k: retErrno | errnoEPERM})
	if len(prog) != n || n > 255 {
		return nil, fmt.Errorf("seccomp: program length %d, expected %d (at most 255)", len(prog), n)
	}

	out := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		out = binary.NativeEndian.AppendUint16(out, ins.code)
		out = append(out, ins.jt, ins.jf)
		out = binary.NativeEndian.AppendUint32(out, ins.k)
	}
	return out, nil
}
