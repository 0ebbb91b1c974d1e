package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// helperCommand makes the test binary act as a small client inside the sandbox. The
// binary is bound there as SelfBinary, so tests run "SelfBinary helperCommand …".
const helperCommand = "sandbox-test-helper"

// runHelper dispatches the helper modes; it returns the process exit code.
func runHelper(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no mode")
		return 2
	}
	switch args[0] {
	case "llm":
		return helperLLM(args[1:])
	case "dial":
		return helperDial(args[1:])
	case "echo":
		return helperEcho(args[1:])
	case "syscalls":
		return helperSyscalls()
	}
	fmt.Fprintln(os.Stderr, "helper: unknown mode", args[0])
	return 2
}

// helperLLM sends one Messages API request to ANTHROPIC_BASE_URL the way Claude Code
// does and prints "status=N" and the body, line by line as it arrives.
func helperLLM(args []string) int {
	mode := "ok"
	if len(args) > 0 {
		mode = args[0]
	}
	base, key := os.Getenv("ANTHROPIC_BASE_URL"), os.Getenv("ANTHROPIC_API_KEY")
	req, err := http.NewRequest("POST", base+"/v1/messages?beta=true", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	req.Header.Set("Content-Type", "application/json")
	switch mode {
	case "ok", "stream":
		req.Header.Set("X-Api-Key", key)
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+key)
	case "wrong":
		req.Header.Set("X-Api-Key", "istota-task-0000")
	case "none":
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer resp.Body.Close()
	fmt.Printf("status=%d\n", resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			fmt.Print(line)
		}
		if err != nil {
			break
		}
	}
	return 0
}

// helperDial connects to NETWORK ADDR and prints "connected" or the error.
func helperDial(args []string) int {
	if len(args) != 2 {
		return 2
	}
	c, err := net.DialTimeout(args[0], args[1], 5*time.Second)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	c.Close()
	fmt.Println("connected")
	return 0
}

// helperEcho sends "ping" to NETWORK ADDR and prints the answer.
func helperEcho(args []string) int {
	if len(args) != 2 {
		return 2
	}
	c, err := net.DialTimeout(args[0], args[1], 5*time.Second)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer c.Close()
	fmt.Fprintln(c, "ping")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Print("answer=", line)
	return 0
}

// helperSyscalls tries system calls the seccomp filter denies, each in a way that
// succeeds without the filter, and prints "name=ok" or "name=<errno text>".
func helperSyscalls() int {
	a, err := seccompArchFor(runtime.GOARCH)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	report := func(name string, errno syscall.Errno) {
		if errno == 0 {
			fmt.Printf("%s=ok\n", name)
		} else {
			fmt.Printf("%s=%s\n", name, errno.Error())
		}
	}

	// ptrace of our own child: allowed by the kernel (even under Yama) without the filter.
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	runtime.LockOSThread()
	_, _, e := syscall.Syscall6(uintptr(a.denied["ptrace"]), syscall.PTRACE_ATTACH, uintptr(child.Process.Pid), 0, 0, 0, 0)
	report("ptrace", e)
	runtime.UnlockOSThread()

	// process_vm_readv of our own memory.
	src := []byte("12345678")
	dst := make([]byte, len(src))
	local := syscall.Iovec{Base: &dst[0], Len: uint64(len(dst))}
	remote := syscall.Iovec{Base: &src[0], Len: uint64(len(src))}
	_, _, e = syscall.Syscall6(uintptr(a.denied["process_vm_readv"]), uintptr(os.Getpid()),
		uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	report("process_vm_readv", e)

	// io_uring_setup with one entry.
	var params [120]byte
	fd, _, e := syscall.Syscall(uintptr(a.denied["io_uring_setup"]), 1, uintptr(unsafe.Pointer(&params[0])), 0)
	report("io_uring_setup", e)
	if e == 0 {
		syscall.Close(int(fd))
	}

	// keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, create).
	keySpecProcessKeyring := int64(-2)
	_, _, e = syscall.Syscall(uintptr(a.denied["keyctl"]), 0, uintptr(keySpecProcessKeyring), 1)
	report("keyctl", e)
	return 0
}
