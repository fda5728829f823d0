//go:build tools

// Package tools pins the helm binary the chart tests build; nothing imports it.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
