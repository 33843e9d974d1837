module example.com/nenyax-learner-gotab

go 1.21
