<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\SetupCheck;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Exception\SidecarException;
use OCA\Istota\Exception\SidecarRejectedException;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Service\SidecarClient;
use OCA\Istota\Service\TalkEnvironment;
use OCA\Istota\Service\VersionMatch;
use OCP\App\IAppManager;
use OCP\IL10N;
use OCP\SetupCheck\ISetupCheck;
use OCP\SetupCheck\SetupResult;

/**
 * SidecarSetupCheck shows on Administration → Overview whether Istota works: the app is
 * set up, the sidecar answers and accepts the app's signature, it runs the same release
 * as the app, and the Talk bot is registered. The first problem that stops Istota is an
 * error; a version mismatch or a missing Talk bot is a warning.
 */
class SidecarSetupCheck implements ISetupCheck {
	/** The overview runs every check in the admin's request: keep this one short. */
	private const TIMEOUT = 3.0;

	public function __construct(
		private readonly AppSettings $settings,
		private readonly SidecarClient $client,
		private readonly TalkEnvironment $talk,
		private readonly IAppManager $appManager,
		private readonly IL10N $l10n,
	) {
	}

	public function getCategory(): string {
		return 'system';
	}

	public function getName(): string {
		return $this->l10n->t('Istota sidecar');
	}

	public function run(): SetupResult {
		if ($this->settings->sharedSecret() === '') {
			return SetupResult::error($this->l10n->t('Istota is not set up yet. Run "occ istota:setup" and start the sidecar with the configuration it writes.'));
		}
		try {
			$health = $this->client->health(self::TIMEOUT);
		} catch (SidecarException $e) {
			return SetupResult::error($this->l10n->t('The Istota sidecar does not answer at %1$s: %2$s. Start it (systemctl start istota) and run "occ istota:self-test".', [$this->settings->sidecarUrl(), $e->getMessage()]));
		}
		try {
			$echo = bin2hex(random_bytes(8));
			$pong = $this->client->ping($echo, self::TIMEOUT);
			if (($pong['pong'] ?? null) !== $echo) {
				return SetupResult::error($this->l10n->t('The Istota sidecar answered the signed test request wrongly. Run "occ istota:self-test".'));
			}
		} catch (SidecarRejectedException $e) {
			return SetupResult::error($this->l10n->t('The Istota sidecar refuses the app\'s signature (%s): the two hold different shared secrets or the clocks differ. Run "occ istota:setup", install its configuration and restart the sidecar.', [$e->getErrorCode()]));
		} catch (SidecarException $e) {
			return SetupResult::error($this->l10n->t('The Istota sidecar does not answer signed requests: %s', [$e->getMessage()]));
		}

		$warnings = [];
		$sidecarVersion = is_string($health['version'] ?? null) ? $health['version'] : '';
		$appVersion = $this->appVersion();
		if (!VersionMatch::matches($appVersion, $sidecarVersion)) {
			$warnings[] = $this->l10n->t('The sidecar runs version %1$s but the app is version %2$s: restart the sidecar after every app update.', [$sidecarVersion === '' ? '?' : $sidecarVersion, $appVersion === '' ? '?' : $appVersion]);
		}
		if (!$this->talk->isAvailable()) {
			$warnings[] = $this->l10n->t('Talk 21 or newer is not enabled, so nobody can talk to Istota.');
		} elseif ($this->settings->botSecret() === '') {
			$warnings[] = $this->l10n->t('The Talk bot is not registered yet. Run "occ istota:setup".');
		}
		if ($warnings !== []) {
			return SetupResult::warning(implode(' ', $warnings));
		}
		return SetupResult::success($this->l10n->t('The sidecar %s answers signed requests and the Talk bot is registered.', [$sidecarVersion]));
	}

	private function appVersion(): string {
		try {
			return (string)$this->appManager->getAppVersion(Application::APP_ID);
		} catch (\Throwable) {
			return '';
		}
	}
}
