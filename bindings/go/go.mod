module github.com/nenyax/nenyax/bindings/go

go 1.22
