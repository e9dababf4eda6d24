//go:build !linux

package capture

import "errors"

func openLive(string, uint16) (packets, error) {
	return nil, errors.New("capture: live capture needs Linux (AF_PACKET); read a tcpdump file with --pcap instead")
}
