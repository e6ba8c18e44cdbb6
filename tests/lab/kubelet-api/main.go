// The kubelet API of a cluster lab node, as far as `kubectl exec` and
// `kubectl port-forward` need it.
//
// The API server sends a pod's exec to the kubelet of the pod's node:
// https://<node InternalIP>:10250/exec/<namespace>/<pod>/<container>?command=…
// upgraded to a SPDY or WebSocket stream. The lab has no kubelet
// (tests/lab/kubelet.sh stands in for it), so this program, one per node in
// the node's network namespace (tests/lab/lab.sh), serves that endpoint
// with the kubelet's own stream handling (k8s.io/cri-streaming, which the
// kubelet uses for CRI streaming) and runs each command with
// exec-in-pod.sh, which enters the pod's network and mount namespaces.
//
// Like a kubelet, it serves TLS with the node's serving certificate and
// accepts only clients whose certificate the cluster's CA signed (the API
// server's kubelet client certificate). It authorizes nothing further and
// serves nothing but exec and port-forward (the API server sends a pod's
// port-forward to /portForward/<namespace>/<pod>, served with the
// kubelet's own stream handling too; each forwarded connection is dialled
// from inside the pod's network namespace, to 127.0.0.1, as a container
// runtime's port-forward does): logs and attach answer 404.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The kubelet's defaults (--streaming-connection-idle-timeout, and the
// time a client has to open its streams).
const (
	idleTimeout           = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

func main() {
	listen := flag.String("listen", "", "address:port to serve on (the node's InternalIP and 10250)")
	pods := flag.String("pods", "", "the node's pods folder: <uid>/name holds <namespace>/<pod> (kubelet.sh)")
	helper := flag.String("exec-helper", "", "exec-in-pod.sh")
	cert := flag.String("tls-cert-file", "", "serving certificate")
	key := flag.String("tls-private-key-file", "", "serving key")
	clientCA := flag.String("client-ca-file", "", "CA that signs the API server's client certificate")
	flag.Parse()
	if *listen == "" || *pods == "" || *helper == "" || *cert == "" || *key == "" || *clientCA == "" {
		flag.Usage()
		os.Exit(2)
	}
	ca, err := os.ReadFile(*clientCA)
	if err != nil {
		log.Fatal(err)
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(ca) {
		log.Fatalf("no certificate in %s", *clientCA)
	}

	e := &executor{pods: *pods, helper: *helper}
	mux := http.NewServeMux()
	// The kubelet's two forms; the API server uses the first.
	mux.HandleFunc("/exec/{namespace}/{pod}/{container}", e.serve)
	mux.HandleFunc("/exec/{namespace}/{pod}/{uid}/{container}", e.serve)
	mux.HandleFunc("/portForward/{namespace}/{pod}", e.servePortForward)
	mux.HandleFunc("/portForward/{namespace}/{pod}/{uid}", e.servePortForward)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	server := &http.Server{
		Addr:              *listen,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients},
	}
	log.Printf("serving exec and port-forward on https://%s for the pods of %s", *listen, *pods)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}

type executor struct {
	pods   string
	helper string
}

func (e *executor) serve(w http.ResponseWriter, req *http.Request) {
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	name := req.PathValue("namespace") + "/" + req.PathValue("pod")
	remotecommand.ServeExec(w, req, e, name, req.PathValue("uid"), req.PathValue("container"),
		req.URL.Query()["command"], opts, idleTimeout, streamCreationTimeout,
		remotecommand.SupportedStreamingProtocols)
}

func (e *executor) servePortForward(w http.ResponseWriter, req *http.Request) {
	opts, err := portforward.NewV4Options(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	name := req.PathValue("namespace") + "/" + req.PathValue("pod")
	portforward.ServePortForward(w, req, e, name, req.PathValue("uid"), opts,
		idleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// PortForward copies between stream and a connection to 127.0.0.1:port in
// the pod's network namespace (portforward.PortForwarder).
func (e *executor) PortForward(ctx context.Context, name, uid string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	dir, err := e.podDir(name, uid)
	if err != nil {
		return err
	}
	pidText, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		return fmt.Errorf("pod %s: pid %q: %w", name, pidText, err)
	}
	conn, err := dialInNetns(ctx, pid, fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		log.Printf("port-forward %s:%d: %v", name, port, err)
		return err
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	<-done
	return nil
}

// dialInNetns makes a TCP connection from the network namespace of
// process pid: the socket is created on this thread while it is in that
// namespace, and keeps it after the thread returns to its own.
func dialInNetns(ctx context.Context, pid int, address string) (net.Conn, error) {
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, err
	}
	defer target.Close()
	runtime.LockOSThread()
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer own.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns: %w", err)
	}
	var dialer net.Dialer
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, dialErr := dialer.DialContext(dialCtx, "tcp", address)
	cancel()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it dies with its goroutine rather
		// than serve another in the pod's namespace.
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return conn, dialErr
}

// podDir finds the folder kubelet.sh keeps for the pod named
// <namespace>/<pod> (and of that uid, if the request names one).
func (e *executor) podDir(name, uid string) (string, error) {
	names, err := filepath.Glob(filepath.Join(e.pods, "*", "name"))
	if err != nil {
		return "", err
	}
	for _, f := range names {
		b, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		dir := filepath.Dir(f)
		if uid == "" || filepath.Base(dir) == uid {
			return dir, nil
		}
	}
	return "", fmt.Errorf("pod %s does not run on this node", name)
}

// ExecInContainer runs cmd in the pod (remotecommand.Executor). The lab
// runs a pod's first container only, so the container name is not checked.
func (e *executor) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	dir, err := e.podDir(name, uid)
	if err != nil {
		return err
	}
	c := exec.CommandContext(ctx, e.helper, append([]string{dir}, cmd...)...)
	// Output a command leaves to a child of its own is not waited for long.
	c.WaitDelay = 2 * time.Second
	if tty {
		err = runWithTerminal(c, in, out, resize)
	} else {
		err = runWithPipes(c, in, out, errOut)
	}
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	}
	log.Printf("exec %s %q: exit %d, %v", name, cmd, code, err)
	if exitErr != nil {
		// What makes the API server's client say "command terminated with
		// exit code N" and kubectl exit with N.
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}

func runWithPipes(c *exec.Cmd, in io.Reader, out, errOut io.Writer) error {
	c.Stdout = out
	c.Stderr = errOut
	if in != nil {
		// Not c.Stdin = in: Wait would wait for the client to close its
		// stdin even after the command has exited.
		w, err := c.StdinPipe()
		if err != nil {
			return err
		}
		go func() {
			_, _ = io.Copy(w, in)
			_ = w.Close()
		}()
	}
	return c.Run()
}

// runWithTerminal gives the command a new terminal as its stdin, stdout,
// stderr and controlling terminal, and copies between it and the streams
// (with a terminal, there is no separate stderr).
func runWithTerminal(c *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	ptmx, term, err := pty.Open()
	if err != nil {
		return err
	}
	defer func() { _ = ptmx.Close() }()
	c.Stdin, c.Stdout, c.Stderr = term, term, term
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		_ = term.Close()
		return err
	}
	// Only the command holds the terminal now: its output ends (EIO) when
	// the command and whatever it started have closed it.
	_ = term.Close()
	if resize != nil {
		go func() {
			for size := range resize {
				_ = pty.Setsize(ptmx, &pty.Winsize{Rows: size.Height, Cols: size.Width})
			}
		}()
	}
	if in != nil {
		go func() { _, _ = io.Copy(ptmx, in) }()
	}
	if out == nil {
		out = io.Discard
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, ptmx)
		close(copied)
	}()
	err = c.Wait()
	// All of the command's output, before the exit status goes out.
	select {
	case <-copied:
	case <-time.After(c.WaitDelay):
	}
	return err
}
