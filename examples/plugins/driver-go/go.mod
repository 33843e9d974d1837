module example.com/nenyax-driver-gosums

go 1.21
