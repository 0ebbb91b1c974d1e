<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\MailboxService;
use OCP\AppFramework\Http;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\BruteForceProtection;
use OCP\AppFramework\Http\Attribute\NoAdminRequired;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * MailboxController serves "Your mailbox" on the personal page: the logged-in user's own
 * IMAP account, for them only. The password is write-only: it goes to the sidecar and
 * never comes back.
 */
class MailboxController extends OcsBaseController {
	/** Brute-force bucket of logins the user's mail server refused. */
	public const THROTTLE_ACTION = 'istota_mailbox';

	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly MailboxService $mailbox,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	/** {connected, host, port, tls, username, connected_at, checked_at, ok, last_error, messages, unseen}. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/mailbox')]
	public function get(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->mailbox->get($uid));
	}

	/**
	 * Logs in with the account given and keeps it when that works; 422 names the field at
	 * fault. A password the mail server refused counts for Nextcloud's brute-force
	 * protection, so the page cannot be used to guess someone's mail password quickly.
	 */
	#[NoAdminRequired]
	#[BruteForceProtection(action: self::THROTTLE_ACTION)]
	#[ApiRoute(verb: 'PUT', url: '/api/v1/me/mailbox')]
	public function connect(mixed $host = null, mixed $port = null, mixed $tls = null, mixed $username = null, #[\SensitiveParameter] mixed $password = null): DataResponse {
		$response = $this->forUser(fn (string $uid): array => $this->mailbox->connect($uid, $host, $port, $tls, $username, $password));
		$data = $response->getData();
		if ($response->getStatus() === Http::STATUS_UNPROCESSABLE_ENTITY && is_array($data) && isset($data['fields']['password'])) {
			$response->throttle(['action' => self::THROTTLE_ACTION]);
		}
		return $response;
	}

	/** Logs in with the stored account now. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'POST', url: '/api/v1/me/mailbox/test')]
	public function test(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->mailbox->test($uid));
	}

	/** Forgets the account and its password. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'DELETE', url: '/api/v1/me/mailbox')]
	public function disconnect(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->mailbox->disconnect($uid));
	}
}
