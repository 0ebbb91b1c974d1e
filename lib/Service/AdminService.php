<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\BackgroundJob\EnsureHomeConversations;
use OCA\Istota\Exception\InvalidInputException;
use OCA\Istota\Exception\SidecarException;
use OCP\App\IAppManager;
use OCP\BackgroundJob\IJobList;

/**
 * AdminService is the admin section: the sidecar's health next to the app's own version,
 * and the admin settings that live in the sidecar (access, sandbox, network, brain,
 * workers, limits, approvals). The brain's API key is write-only: it passes through on its way to
 * the sidecar and the sidecar never sends it back.
 */
class AdminService {
	/** The sections of AdminSettings (docs/user-api.md, "Admin"). */
	public const SECTIONS = ['access', 'sandbox', 'network', 'brain', 'workers', 'limits', 'approvals'];

	public function __construct(
		private readonly SidecarClient $client,
		private readonly IAppManager $appManager,
		private readonly IJobList $jobs,
	) {
	}

	/**
	 * GET /v1/admin/health plus "app_version" and "version_matches" (the app's version and
	 * whether the sidecar runs the same release).
	 *
	 * @return array<string, mixed>
	 * @throws SidecarException
	 */
	public function health(): array {
		$health = $this->client->getJson('/v1/admin/health', SidecarClient::DEFAULT_TIMEOUT);
		$appVersion = $this->appVersion();
		$health['app_version'] = $appVersion;
		$health['version_matches'] = VersionMatch::matches($appVersion, is_string($health['version'] ?? null) ? $health['version'] : '');
		return $health;
	}

	/**
	 * @return array<string, mixed> {"settings": AdminSettings, "restart_required": [...]}
	 * @throws SidecarException
	 */
	public function settings(): array {
		return $this->client->getJson('/v1/admin/settings');
	}

	/**
	 * Sends the given sections (null means "not given"); each is an object of the fields to
	 * change. Nothing is stored unless every field is valid (the sidecar answers 422 with
	 * every problem at once).
	 *
	 * @param array<string, mixed> $changes section => fields
	 * @return array<string, mixed> {"settings": AdminSettings, "restart_required": [...]}
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function updateSettings(array $changes): array {
		$body = [];
		foreach (self::SECTIONS as $section) {
			$value = $changes[$section] ?? null;
			if ($value === null) {
				continue;
			}
			if (!is_array($value) || ($value !== [] && array_is_list($value))) {
				throw new InvalidInputException(sprintf('"%s" must be an object of settings', $section));
			}
			// An empty object decodes to an empty PHP array; send it back as an object.
			$body[$section] = $value === [] ? new \stdClass() : $value;
		}
		$answer = $this->client->putJson('/v1/admin/settings', $body);
		// Who may use the bot changed: the users it now lets in get their conversation.
		if (isset($body['access']) && !$this->jobs->has(EnsureHomeConversations::class, null)) {
			$this->jobs->add(EnsureHomeConversations::class);
		}
		return $answer;
	}

	private function appVersion(): string {
		try {
			return (string)$this->appManager->getAppVersion(Application::APP_ID);
		} catch (\Throwable) {
			return '';
		}
	}
}
