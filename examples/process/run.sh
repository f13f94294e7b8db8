cd examples/process
node app.mjs                                                    # plain node, for comparison
npx tensorpool run --stats -- node app.mjs                      # default classes, grown on demand
npx tensorpool run --record app.csv -- node app.mjs             # record what the pool served (at exit)
npx tensorpool train app.csv -o app.plan.json                   # train a plan from the recording
npx tensorpool run --plan app.plan.json --stats -- node app.mjs # classes and schedule from the start
