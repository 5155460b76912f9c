package cri

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Client asks a container runtime about containers over its CRI socket.
type Client struct {
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	timeout time.Duration
}

// Dial connects to a runtime endpoint ("unix:///run/containerd/containerd.sock"
// or a socket path); each call gives up after timeout. The connection is
// made on first use.
func Dial(endpoint string, timeout time.Duration) (*Client, error) {
	target := endpoint
	if !strings.HasPrefix(target, "unix://") {
		if !strings.HasPrefix(target, "/") {
			return nil, fmt.Errorf("runtime endpoint %q: want unix:///path or /path", endpoint)
		}
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(2*MaxInfoBytes)))
	if err != nil {
		return nil, fmt.Errorf("runtime endpoint %q: %w", endpoint, err)
	}
	return &Client{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn), timeout: timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Container asks the runtime for a running container's process and spec
// (ContainerStatus, verbose).
func (c *Client) Container(ctx context.Context, id string) (Container, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if status.Code(err) == codes.NotFound {
		return Container{}, fmt.Errorf("%w: %s: %w", ErrNotFound, id, err)
	}
	if err != nil {
		return Container{}, fmt.Errorf("container status %s: %w", id, err)
	}
	return ParseStatus(id, r)
}
