module github.com/seqsvr/seqsvr/sdk/go

go 1.19

require (
	github.com/BurntSushi/toml v1.2.0
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
