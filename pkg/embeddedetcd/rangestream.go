/*
Copyright The network-apiserver Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package embeddedetcd

import (
	"context"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// streamingKV is the in-process KV client with RangeStream: etcd's in-process adapter answers
// RangeStream with Unimplemented, so a long scan through it would fall back to pages of a unary
// Range, each of which counts every key left in its range (a scan of n keys in pages of p costs
// etcd about n²/p key visits). A stream reads each key once.
type streamingKV struct {
	pb.KVClient
	server pb.KVServer
}

// RangeStream runs the member's RangeStream in a goroutine that hands each chunk to the
// returned stream. The goroutine ends with the range, or when ctx is done: a caller that stops
// reading must cancel ctx.
func (kv *streamingKV) RangeStream(ctx context.Context, in *pb.RangeRequest, _ ...grpc.CallOption) (pb.KV_RangeStreamClient, error) {
	s := &rangeStream{ctx: ctx, chunks: make(chan *pb.RangeStreamResponse), done: make(chan struct{})}
	go func() {
		s.err = kv.server.RangeStream(in, &rangeStreamServer{s})
		close(s.done)
	}()
	return s, nil
}

// rangeStream is both ends of one in-process RangeStream.
type rangeStream struct {
	ctx    context.Context
	chunks chan *pb.RangeStreamResponse
	done   chan struct{}
	err    error // the server's result, set before done is closed
}

// Recv returns the next chunk; io.EOF after the last one.
func (s *rangeStream) Recv() (*pb.RangeStreamResponse, error) {
	select {
	case c := <-s.chunks:
		return c, nil
	case <-s.done:
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (s *rangeStream) Header() (metadata.MD, error) { return nil, nil }
func (s *rangeStream) Trailer() metadata.MD         { return nil }
func (s *rangeStream) CloseSend() error             { return nil }
func (s *rangeStream) Context() context.Context     { return s.ctx }
func (s *rangeStream) SendMsg(any) error            { return nil }
func (s *rangeStream) RecvMsg(any) error            { return nil }

// rangeStreamServer is the server's end: Send waits for Recv, or for the caller to give up.
type rangeStreamServer struct{ s *rangeStream }

func (r *rangeStreamServer) Send(c *pb.RangeStreamResponse) error {
	select {
	case r.s.chunks <- c:
		return nil
	case <-r.s.ctx.Done():
		return r.s.ctx.Err()
	}
}

func (r *rangeStreamServer) SetHeader(metadata.MD) error  { return nil }
func (r *rangeStreamServer) SendHeader(metadata.MD) error { return nil }
func (r *rangeStreamServer) SetTrailer(metadata.MD)       {}
func (r *rangeStreamServer) Context() context.Context     { return r.s.ctx }
func (r *rangeStreamServer) SendMsg(any) error            { return nil }
func (r *rangeStreamServer) RecvMsg(any) error            { return nil }
