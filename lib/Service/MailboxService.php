<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\InvalidInputException;
use OCA\Istota\Exception\SidecarException;

/**
 * MailboxService is the personal page's "Your mailbox": the user's own IMAP account,
 * which the sidecar logs in to before it seals the password in its credential store.
 * The password only passes through here on its way to the sidecar: it is never stored,
 * logged or sent back (the sidecar answers with the account and the last check only).
 */
class MailboxService {
	private const TLS_MODES = ['tls', 'starttls'];
	private const MAX_FIELD = 1024;

	public function __construct(
		private readonly SessionService $sessions,
		private readonly SidecarClient $client,
	) {
	}

	/**
	 * @return array<string, mixed> {connected, host, port, tls, username, connected_at, checked_at, ok, last_error, messages, unseen}
	 * @throws SidecarException
	 */
	public function get(string $uid): array {
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'mailbox'));
	}

	/**
	 * Connects (or changes) the mailbox; the sidecar logs in first and answers 422 with
	 * the field at fault when it cannot. An empty password keeps the stored one for the
	 * same server and user name.
	 *
	 * @return array<string, mixed> the mailbox as get() shows it
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function connect(string $uid, mixed $host, mixed $port, mixed $tls, mixed $username, #[\SensitiveParameter] mixed $password): array {
		foreach (['host' => $host, 'username' => $username, 'password' => $password] as $field => $value) {
			if ($value !== null && (!is_string($value) || strlen($value) > self::MAX_FIELD)) {
				throw new InvalidInputException($field . ' must be text of at most ' . self::MAX_FIELD . ' bytes');
			}
		}
		if ($tls !== null && (!is_string($tls) || !in_array($tls, self::TLS_MODES, true))) {
			throw new InvalidInputException('tls must be "tls" or "starttls"');
		}
		if (is_string($port) && ctype_digit($port)) {
			$port = (int)$port;
		}
		if ($port !== null && $port !== '' && (!is_int($port) || $port < 0 || $port > 65535)) {
			throw new InvalidInputException('port must be a number from 1 to 65535');
		}
		$this->sessions->ensure($uid);
		return $this->client->putJson(SidecarClient::userPath($uid, 'mailbox'), [
			'host' => (string)($host ?? ''),
			'port' => is_int($port) ? $port : 0,
			'tls' => (string)($tls ?? ''),
			'username' => (string)($username ?? ''),
			'password' => (string)($password ?? ''),
		]);
	}

	/**
	 * Logs in with the stored account now; the answer's ok and last_error say how it went.
	 *
	 * @return array<string, mixed>
	 * @throws SidecarException
	 */
	public function test(string $uid): array {
		$this->sessions->ensure($uid);
		return $this->client->postJson(SidecarClient::userPath($uid, 'mailbox/test'));
	}

	/**
	 * Forgets the account and deletes its sealed password.
	 *
	 * @return array<string, mixed> {connected: false, …}
	 * @throws SidecarException
	 */
	public function disconnect(string $uid): array {
		$this->sessions->ensure($uid);
		return $this->client->deleteJson(SidecarClient::userPath($uid, 'mailbox'));
	}
}
