//go:build tools

// Package tools keeps the control-plane main packages in go.mod / go.sum (go mod tidy).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "go.etcd.io/etcd/server/v3"
)
