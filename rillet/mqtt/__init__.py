"""MQTT 3.1.1 and 5.0 for Rillet (``mqtt {}``), as nats-server 2.15 does 3.1.1, on Rillet's own JetStream.

* ``codec``: sans-IO packets (fixed header, remaining length, every packet and MQTT 5 property).
* ``topics``: MQTT topic <-> NATS subject mapping.
* ``store``: the account's MQTT state in JetStream (``$MQTT_sess``, ``$MQTT_msgs``, ``$MQTT_rmsgs``,
  ``$MQTT_qos2in``, ``$MQTT_out``) through the JetStream API, as nats-server keeps it.
* ``conn``: one MQTT connection; ``listener``: the ``mqtt {}`` port (and ``/mqtt`` on the websocket port).
"""
