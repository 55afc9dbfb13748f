package localcluster

import "net"

// FreePorts returns n distinct free loopback ports. The listeners stay open until all n are
// picked: closed one by one, the kernel may hand out the same port twice.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
